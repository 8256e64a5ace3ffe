//! Incremental joins: inner, outer, semi, anti and mark joins on equal
//! keys, with an optional residual condition.
//!
//! Each side is kept as a bag of rows grouped by its join key. An inner
//! join uses the delta rule `Δ(L⋈R) = ΔL⋈R + L'⋈ΔR`: a change on one side
//! is joined with the other side's rows of the same keys. The other kinds
//! depend on whether a row has any match, so for the keys a change touches
//! they join the old and the new rows of those keys and emit the
//! difference. Either way the cost is the size of the touched key groups.

use std::collections::{BTreeSet, HashMap};

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, UInt32Array};
use datafusion::arrow::compute::{and, is_not_null, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::JoinType;
use datafusion::error::DataFusionError;

use crate::plan::JoinSpec;
use crate::{Changes, Multiset, Operator, Result};

/// One side of a join: its rows and their encoded keys.
struct Side<'a> {
    rows: &'a Changes,
    keys: Vec<Box<[u8]>>,
    /// Whether each row's key can match (no NULL in it).
    matchable: Vec<bool>,
}

/// A join of two changing inputs.
#[derive(Debug)]
pub struct Join {
    spec: JoinSpec,
    left: Multiset,
    right: Multiset,
    output_schema: SchemaRef,
    /// The encoding of a NULL right key (null-aware anti joins only).
    null_key: Option<Box<[u8]>>,
}

/// What a null-aware anti join needs to know about its right side as a
/// whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RightStatus {
    empty: bool,
    has_null: bool,
}

impl Join {
    /// A join of rows of `left_schema` and `right_schema`.
    pub fn new(
        spec: JoinSpec,
        left_schema: SchemaRef,
        right_schema: SchemaRef,
        output_schema: SchemaRef,
    ) -> Result<Self> {
        for (l, r) in spec.left_keys.iter().zip(&spec.right_keys) {
            let (lt, rt) = (l.data_type(&left_schema)?, r.data_type(&right_schema)?);
            if lt != rt {
                return Err(DataFusionError::NotImplemented(format!(
                    "join keys of different types ({lt} and {rt})"
                )));
            }
        }
        let right = Multiset::new(right_schema.clone(), spec.right_keys.clone(), None)?;
        let null_key = if spec.null_aware {
            if spec.right_keys.len() != 1 || spec.filter.is_some() {
                return Err(DataFusionError::NotImplemented(
                    "materialized views do not support NOT IN with several columns or extra conditions".into(),
                ));
            }
            let data_type = spec.right_keys[0].data_type(&right_schema)?;
            let keys = right.encode_keys(&[new_null_array(&data_type, 1)], 1)?;
            keys.into_iter().next()
        } else {
            None
        };
        Ok(Join {
            left: Multiset::new(left_schema, spec.left_keys.clone(), None)?,
            right,
            spec,
            output_schema,
            null_key,
        })
    }

    fn side<'a>(&self, bag: &Multiset, rows: &'a Changes) -> Result<Side<'a>> {
        let columns = bag.key_columns(&rows.rows)?;
        let keys = bag.encode_keys(&columns, rows.len())?;
        let matchable = if self.spec.nulls_equal {
            vec![true; rows.len()]
        } else {
            not_null_rows(&columns, rows.len())?
        };
        Ok(Side {
            rows,
            keys,
            matchable,
        })
    }

    /// The join of `left` and `right` (rows of the same keys), as `kind`.
    fn join(&self, kind: JoinType, left: &Changes, right: &Changes) -> Result<Changes> {
        let l = self.side(&self.left, left)?;
        let r = self.side(&self.right, right)?;
        // Probing a hash table is per row by nature; everything after it
        // is done with `take` and filter kernels on whole columns.
        let mut by_key: HashMap<&[u8], Vec<u32>> = HashMap::new();
        for (j, key) in r.keys.iter().enumerate() {
            if r.matchable[j] {
                by_key.entry(key.as_ref()).or_default().push(j as u32);
            }
        }
        let (mut li, mut ri) = (Vec::new(), Vec::new());
        for (i, key) in l.keys.iter().enumerate() {
            if !l.matchable[i] {
                continue;
            }
            if let Some(matches) = by_key.get(key.as_ref()) {
                li.extend(std::iter::repeat_n(i as u32, matches.len()));
                ri.extend_from_slice(matches);
            }
        }
        let (li, ri) = (UInt32Array::from(li), UInt32Array::from(ri));
        let mut pairs = self.pair_rows(&l, &r, &li, &ri)?;
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
                parts.push(self.padded(&l, &left_matched, true)?);
            }
            JoinType::Right => {
                parts.push(pairs);
                parts.push(self.padded(&r, &right_matched, false)?);
            }
            JoinType::Full => {
                parts.push(pairs);
                parts.push(self.padded(&l, &left_matched, true)?);
                parts.push(self.padded(&r, &right_matched, false)?);
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

    /// Rows of both sides side by side, weights multiplied.
    fn pair_rows(&self, l: &Side, r: &Side, li: &UInt32Array, ri: &UInt32Array) -> Result<Changes> {
        let left = l.rows.rows.columns().iter().map(|c| (c, li));
        let right = r.rows.rows.columns().iter().map(|c| (c, ri));
        let columns = left
            .chain(right)
            .map(|(c, indices)| take(c.as_ref(), indices, None))
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        let lw = take(&l.rows.weights, li, None)?;
        let rw = take(&r.rows.weights, ri, None)?;
        let weights = datafusion::arrow::compute::kernels::numeric::mul(&lw, &rw)?;
        let weights = crate::changes::as_weights(&weights)?;
        let mut fields: Vec<_> = l.rows.schema().fields().iter().cloned().collect();
        fields.extend(r.rows.schema().fields().iter().cloned());
        let schema = std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        let batch = RecordBatch::try_new_with_options(
            schema,
            columns,
            &RecordBatchOptions::new().with_row_count(Some(li.len())),
        )?;
        Changes::new(batch, weights)
    }

    /// The rows of one side that matched nothing, with NULLs for the
    /// other side's columns.
    fn padded(&self, side: &Side, matched: &[bool], side_is_left: bool) -> Result<Changes> {
        let lonely = side.rows.filter(&negated(matched))?;
        let other = if side_is_left {
            self.right.schema()
        } else {
            self.left.schema()
        };
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
}

impl Join {
    fn right_status(&self) -> RightStatus {
        RightStatus {
            empty: self.right.is_empty(),
            has_null: self
                .null_key
                .as_ref()
                .is_some_and(|k| self.right.has_key(k)),
        }
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
        let this = self.side_state(from_left);
        let columns = this.key_columns(&input.rows)?;
        let keys = this.encode_keys(&columns, input.len())?;
        let touched: BTreeSet<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
        let before = self.right_status();
        let left_before = self.left.rows_with_keys(touched.iter().copied())?;
        let right_before = self.right.rows_with_keys(touched.iter().copied())?;
        let mut out = vec![self.not_in(&left_before, &right_before, before)?.negate()];
        self.side_state_mut(from_left)
            .update_with_keys(&input, &keys)?;
        let after = self.right_status();
        let left_after = self.left.rows_with_keys(touched.iter().copied())?;
        let right_after = self.right.rows_with_keys(touched.iter().copied())?;
        out.push(self.not_in(&left_after, &right_after, after)?);
        if before != after {
            let (rest, rest_keys) = self.left.rows_without_keys(&touched)?;
            let rights = self.right.rows_with_keys(rest_keys)?;
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
        let this = self.side_state(from_left);
        let columns = this.key_columns(&input.rows)?;
        let keys = this.encode_keys(&columns, input.len())?;
        let touched: BTreeSet<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
        let others = self
            .side_state(!from_left)
            .rows_with_keys(touched.iter().copied())?;
        let kind = self.spec.join_type;
        let mut out = Vec::with_capacity(2);
        if kind == JoinType::Inner {
            // The delta rule: the change joined with the other side.
            out.push(self.join_sides(kind, from_left, &input, &others)?);
        } else {
            // Whether a row matches can flip: the touched keys' rows
            // before the change go out, after it come in.
            let before = self
                .side_state(from_left)
                .rows_with_keys(touched.iter().copied())?;
            out.push(self.join_sides(kind, from_left, &before, &others)?.negate());
        }
        self.side_state_mut(from_left)
            .update_with_keys(&input, &keys)?;
        if kind != JoinType::Inner {
            let after = self
                .side_state(from_left)
                .rows_with_keys(touched.iter().copied())?;
            out.push(self.join_sides(kind, from_left, &after, &others)?);
        }
        Ok(out)
    }

    fn state(&mut self) -> Vec<&mut Multiset> {
        vec![&mut self.left, &mut self.right]
    }
}

impl Join {
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

    fn side_state(&self, left: bool) -> &Multiset {
        if left {
            &self.left
        } else {
            &self.right
        }
    }

    fn side_state_mut(&mut self, left: bool) -> &mut Multiset {
        if left {
            &mut self.left
        } else {
            &mut self.right
        }
    }
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
    columns.push(std::sync::Arc::new(BooleanArray::from(matched)));
    let mut fields: Vec<_> = rows.schema().fields().iter().cloned().collect();
    fields.push(std::sync::Arc::new(
        datafusion::arrow::datatypes::Field::new(
            "mark",
            datafusion::arrow::datatypes::DataType::Boolean,
            false,
        ),
    ));
    let schema = std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
    let batch = RecordBatch::try_new_with_options(
        schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?;
    Changes::new(batch, rows.weights.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{kv, kv_schema, net, rows};
    use datafusion::arrow::datatypes::Schema;
    use datafusion::physical_expr::expressions::col;
    use std::sync::Arc;

    fn join(join_type: JoinType) -> Join {
        let schema = kv_schema();
        let spec = JoinSpec {
            join_type,
            left_keys: vec![col("k", &schema).unwrap()],
            right_keys: vec![col("k", &schema).unwrap()],
            filter: None,
            nulls_equal: false,
            null_aware: false,
        };
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        fields.extend(schema.fields().iter().cloned());
        let out = match join_type {
            JoinType::LeftSemi | JoinType::LeftAnti => schema.clone(),
            _ => Arc::new(Schema::new(fields)),
        };
        Join::new(spec, schema.clone(), schema, out).unwrap()
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
        let state = join.state();
        assert_eq!(state[0].distinct_rows(), 2);
        assert_eq!(state[1].distinct_rows(), 2);
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
}
