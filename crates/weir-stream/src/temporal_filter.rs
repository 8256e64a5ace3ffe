//! [`TemporalFilter`]: the rows of a view's `WHERE ts > now() - INTERVAL
//! '1 hour'`, as the epoch clock moves.
//!
//! Each row is in the filter's output while `now()` lies in its interval
//! `[from, until)`, worked out from the row by the node's bounds
//! ([`TemporalBound`]: the SQL front end solves the conditions for
//! `now()`). `now()` is the epoch's time: the runtime picks it when it
//! sends the epoch's barrier and hands it to the operator at the cut,
//! through [`Operator::advance`] under the operator's own node index, like
//! a watermark. Every view cut at that epoch sees the same `now()`, and it
//! never goes back.
//!
//! The operator keeps the rows that are in or still to come, keyed by
//! their bound values ([`KeyedRows`]), with each key's times in two
//! ordered indexes: keys by the time they come in, and by the time they
//! leave. A row whose interval has passed is neither kept nor emitted. At
//! each cut the keys whose time came are taken from the front of the
//! indexes: their rows are emitted (in) or retracted (out) and dropped.
//! A cut therefore costs the rows that enter or leave, not the rows held.
//!
//! State: the rows (by id, as every updating [`KeyedRows`]) and the
//! `now()` in force, per instance.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::{cast, max};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use weir_state::{DeltaBatches, KeyId, TableSpec};

use crate::keyed_rows::KeyedRows;
use crate::operator::expect_tables;
use crate::plan::TemporalBound;
use crate::watermark::Watermarks;
use crate::{Changes, Operator, Placement, Result};

/// A time before every row's: `now()` before the first cut.
const NEVER: i64 = i64::MIN;
/// A time after every row's: the `until` of a row without one.
const FOREVER: i64 = i64::MAX;

/// The rows of its input whose interval holds `now()` (see the module
/// documentation).
#[derive(Debug)]
pub struct TemporalFilter {
    node: usize,
    bounds: Vec<TemporalBound>,
    /// Rows in the output or still to come, keyed by their bound values.
    rows: KeyedRows,
    /// Per key id: its `(from, until)` in Unix microseconds, while listed.
    times: Vec<Option<(i64, i64)>>,
    /// Keys not yet in, by the time they come in.
    entering: BTreeMap<i64, Vec<KeyId>>,
    /// Keys by the time they leave.
    leaving: BTreeMap<i64, Vec<KeyId>>,
    /// `now()` in force, in Unix microseconds.
    now: i64,
    instance: u32,
    /// Whether `now` changed since the last checkpoint.
    now_changed: bool,
}

impl TemporalFilter {
    /// The filter of plan node `node` over rows of `schema`.
    pub fn new(node: usize, bounds: Vec<TemporalBound>, schema: SchemaRef) -> Result<Self> {
        let keys = bounds.iter().map(|b| b.value.clone()).collect();
        Ok(TemporalFilter {
            node,
            bounds,
            rows: KeyedRows::new(schema, keys, true)?,
            times: Vec::new(),
            entering: BTreeMap::new(),
            leaving: BTreeMap::new(),
            now: NEVER,
            instance: 0,
            now_changed: false,
        })
    }

    fn now_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("instance", DataType::UInt32, false),
            Field::new("now", DataType::Int64, false),
        ]))
    }

    /// Each row's `(from, until)` from its bound values (`keys`, one
    /// column per bound); `None` where a bound is NULL (the comparison is
    /// never true).
    fn intervals(&self, keys: &[ArrayRef]) -> Result<Vec<Option<(i64, i64)>>> {
        let rows = keys.first().map_or(0, |k| k.len());
        let mut from = vec![NEVER; rows];
        let mut until = vec![FOREVER; rows];
        let mut nulls: Option<NullBuffer> = None;
        for (bound, values) in self.bounds.iter().zip(keys) {
            let times = micros(values)?;
            nulls = NullBuffer::union(nulls.as_ref(), times.nulls());
            let step = i64::from(bound.plus_one);
            let target = if bound.from { &mut from } else { &mut until };
            // A loop over the values: arrow has no kernel for the
            // elementwise greatest or least of two arrays.
            for (slot, &time) in target.iter_mut().zip(times.values()) {
                let time = time.saturating_add(step);
                *slot = if bound.from {
                    (*slot).max(time)
                } else {
                    (*slot).min(time)
                };
            }
        }
        Ok((0..rows)
            .map(|i| {
                let valid = nulls.as_ref().is_none_or(|n| n.is_valid(i));
                (valid && from[i] < until[i]).then_some((from[i], until[i]))
            })
            .collect())
    }

    /// Lists key `id` with interval `times` in the indexes, unless it is
    /// listed with it already.
    fn list(&mut self, id: KeyId, (from, until): (i64, i64)) {
        let slot = id as usize;
        if self.times.len() <= slot {
            self.times.resize(slot + 1, None);
        }
        if self.times[slot] == Some((from, until)) {
            return;
        }
        self.times[slot] = Some((from, until));
        if from > self.now {
            self.entering.entry(from).or_default().push(id);
        }
        if until != FOREVER {
            self.leaving.entry(until).or_default().push(id);
        }
    }

    /// Lists every stored row's key (after a restore).
    fn list_stored(&mut self, stored: &RecordBatch) -> Result<()> {
        let keys = self.rows.stored_keys(stored)?;
        let ids = self.rows.find_keys(&keys, stored.num_rows())?;
        for (id, interval) in ids.into_iter().zip(self.intervals(&keys)?) {
            if let (Some(id), Some(interval)) = (id, interval) {
                self.list(id, interval);
            }
        }
        Ok(())
    }

    /// The keys listed in `index` at times up to `time`, taken out, that
    /// are still listed there (`at` picks the time of a key's interval).
    fn take_due(
        index: &mut BTreeMap<i64, Vec<KeyId>>,
        times: &[Option<(i64, i64)>],
        time: i64,
        at: impl Fn((i64, i64)) -> i64,
    ) -> Vec<(KeyId, (i64, i64))> {
        let later = match time.checked_add(1) {
            Some(next) => index.split_off(&next),
            None => BTreeMap::new(),
        };
        let due = std::mem::replace(index, later);
        due.into_iter()
            .flat_map(|(t, ids)| ids.into_iter().map(move |id| (t, id)))
            .filter_map(|(t, id)| {
                let interval = times.get(id as usize).copied().flatten()?;
                (at(interval) == t).then_some((id, interval))
            })
            .collect()
    }
}

/// A timestamp or date column as Unix microseconds.
fn micros(values: &ArrayRef) -> Result<Int64Array> {
    let as_micros = match values.data_type() {
        DataType::Timestamp(_, zone) => cast(
            values,
            &DataType::Timestamp(TimeUnit::Microsecond, zone.clone()),
        )?,
        DataType::Date32 | DataType::Date64 => {
            cast(values, &DataType::Timestamp(TimeUnit::Microsecond, None))?
        }
        other => {
            return Err(DataFusionError::Internal(format!(
                "a temporal filter's bound is of type {other}, not a timestamp"
            )))
        }
    };
    Ok(cast(&as_micros, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

impl Operator for TemporalFilter {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        let keys = self.rows.key_columns(&input.rows)?;
        let now = self.now;
        // Rows whose interval has passed never come back: `now()` only
        // moves on.
        let mut kept = Vec::with_capacity(input.len());
        let mask: BooleanArray = self
            .intervals(&keys)?
            .into_iter()
            .map(|interval| {
                let keep = interval.filter(|&(_, until)| until > now);
                kept.extend(keep);
                Some(keep.is_some())
            })
            .collect();
        let kept_rows = input.filter(&mask)?;
        let ids = self.rows.update(&kept_rows)?;
        for (&id, &interval) in ids.iter().zip(&kept) {
            self.list(id, interval);
        }
        let visible: BooleanArray = kept.iter().map(|&(from, _)| Some(from <= now)).collect();
        Ok(vec![kept_rows.filter(&visible)?])
    }

    fn advance(&mut self, watermarks: &Watermarks) -> Result<Vec<Changes>> {
        let Some(&now) = watermarks.get(&self.node) else {
            return Ok(Vec::new());
        };
        if now <= self.now {
            return Ok(Vec::new());
        }
        let before = std::mem::replace(&mut self.now, now);
        self.now_changed = true;
        let entering = Self::take_due(&mut self.entering, &self.times, now, |(from, _)| from);
        let leaving = Self::take_due(&mut self.leaving, &self.times, now, |(_, until)| until);
        let mut out = Vec::new();
        // In now and not out again already.
        let come: Vec<KeyId> = entering
            .iter()
            .filter(|(_, (_, until))| *until > now)
            .map(|(id, _)| *id)
            .collect();
        if !come.is_empty() {
            out.push(self.rows.rows_with_keys(come)?);
        }
        // Out now; retracted if they were in.
        let gone: Vec<KeyId> = leaving
            .iter()
            .filter(|(_, (from, _))| *from <= before)
            .map(|(id, _)| *id)
            .collect();
        if !gone.is_empty() {
            out.push(self.rows.rows_with_keys(gone)?.negate());
        }
        let ids: Vec<KeyId> = leaving.iter().map(|(id, _)| *id).collect();
        for &id in &ids {
            self.times[id as usize] = None;
        }
        self.rows.remove_where(&ids, &[], |rows, _| {
            Ok(BooleanArray::from(vec![false; rows.num_rows()]))
        })?;
        Ok(out)
    }

    fn watermark(&self) -> Option<(usize, i64)> {
        (self.now != NEVER).then_some((self.node, self.now))
    }

    fn watermark_micros(&self) -> Option<i64> {
        (self.now != NEVER).then_some(self.now)
    }

    fn state_specs(&self) -> Vec<TableSpec> {
        vec![
            self.rows.state_spec(),
            TableSpec::with_primary_key(Self::now_schema(), vec![0]),
        ]
    }

    fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>> {
        let now = std::mem::take(&mut self.now_changed)
            .then(|| {
                RecordBatch::try_new(
                    Self::now_schema(),
                    vec![
                        Arc::new(UInt32Array::from(vec![self.instance])),
                        Arc::new(Int64Array::from(vec![self.now])),
                    ],
                )
            })
            .transpose()?
            .map(|upserts| DeltaBatches {
                upserts: Some(upserts),
                deletes: None,
            });
        Ok(vec![self.rows.take_delta()?, now])
    }

    fn restore(&mut self, tables: &[RecordBatch]) -> Result<()> {
        self.restore_share(tables, 0, &Placement::new(1))
    }

    /// Rows are placed by their bound values (the node's exchange); every
    /// instance applies the latest `now()` stored (they all applied the
    /// same ones).
    fn restore_share(
        &mut self,
        tables: &[RecordBatch],
        instance: usize,
        placement: &Placement,
    ) -> Result<()> {
        expect_tables(tables, 2)?;
        let stored = tables[1]
            .column(1)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| {
                DataFusionError::Internal("a temporal filter's now() is not an int64".into())
            })?;
        // Before the rows are listed: those already in are not listed as
        // still to come.
        self.now = max(stored).unwrap_or(NEVER);
        self.instance = instance as u32;
        self.rows
            .restore_share(&tables[0], instance, placement, true)?;
        let keys = self.rows.stored_keys(&tables[0])?;
        let mine = placement.owned_rows(instance, &tables[0], &keys)?;
        self.list_stored(&mine)
    }

    fn memory_size(&self) -> usize {
        let listed: usize = self
            .entering
            .values()
            .chain(self.leaving.values())
            .map(|ids| ids.capacity() * 4 + 32)
            .sum();
        self.rows.memory_size() + self.times.capacity() * 24 + listed
    }

    fn state_rows(&self) -> Vec<usize> {
        vec![self.rows.live_rows(), 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{net, rows};
    use datafusion::arrow::array::TimestampMicrosecondArray;
    use datafusion::physical_expr::expressions::col;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        )]))
    }

    fn changes(times: &[Option<i64>], weight: i64) -> Changes {
        let column = TimestampMicrosecondArray::from(times.to_vec());
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(column)]).unwrap();
        Changes::new(batch, Int64Array::from(vec![weight; times.len()])).unwrap()
    }

    /// `ts <= now() AND ts > now() - 10`: in from `ts`, until `ts + 10`
    /// (the bound `ts + 10` is given as `ts` plus a 10 µs interval).
    fn ten_wide() -> TemporalFilter {
        let ts = col("ts", &schema()).unwrap();
        let ten = Arc::new(datafusion::physical_expr::expressions::Literal::new(
            datafusion::common::ScalarValue::IntervalMonthDayNano(Some(
                datafusion::arrow::datatypes::IntervalMonthDayNano::new(0, 0, 10_000),
            )),
        ));
        let later = Arc::new(datafusion::physical_expr::expressions::BinaryExpr::new(
            ts.clone(),
            datafusion::logical_expr::Operator::Plus,
            ten,
        ));
        let bounds = vec![
            TemporalBound {
                value: ts,
                from: true,
                plus_one: false,
            },
            TemporalBound {
                value: later,
                from: false,
                plus_one: false,
            },
        ];
        TemporalFilter::new(3, bounds, schema()).unwrap()
    }

    #[test]
    fn rows_keep_coming_and_going_after_the_store_is_rebuilt() {
        let mut filter = ten_wide();
        let times: Vec<Option<i64>> = (0..10_000).map(Some).collect();
        let mut out = filter.process(0, changes(&times, 1)).unwrap();
        out.extend(filter.advance(&Watermarks::from([(3, 5)])).unwrap());
        filter.checkpoint().unwrap();
        // Rows up to 5,990 leave: 5,991 removed against 4,009 left, so the
        // next delta rebuilds the store.
        out.extend(filter.advance(&Watermarks::from([(3, 6_000)])).unwrap());
        filter.checkpoint().unwrap();
        out.extend(filter.advance(&Watermarks::from([(3, 9_000)])).unwrap());
        let expected: Vec<(String, i64)> = (8_991..=9_000).map(|t| (t.to_string(), 1)).collect();
        let mut expected = expected;
        expected.sort();
        assert_eq!(net(&out), expected);
        assert_eq!(filter.state_rows()[0], 1_009, "rows 8,991 to 9,999");
    }

    #[test]
    fn rows_come_in_and_leave_as_now_moves_and_survive_a_restore() {
        let mut filter = ten_wide();
        let mut out = Vec::new();
        // Before the first cut nothing is in yet.
        out.extend(
            filter
                .process(0, changes(&[Some(5), Some(15), Some(40), None], 1))
                .unwrap(),
        );
        assert!(net(&out).is_empty());
        out.extend(filter.advance(&Watermarks::from([(3, 16)])).unwrap());
        // 5 left at 15 (never shown); 15 is in; 40 is to come; NULL never.
        assert_eq!(net(&out), rows(&[("15", 1)]));
        // A deleted row that is in goes at once.
        out.extend(filter.process(0, changes(&[Some(15)], -1)).unwrap());
        out.extend(filter.process(0, changes(&[Some(12)], 1)).unwrap());
        assert_eq!(net(&out), rows(&[("12", 1)]));

        let deltas = filter.checkpoint().unwrap();
        let tables: Vec<RecordBatch> = deltas
            .into_iter()
            .map(|d| d.unwrap().upserts.unwrap())
            .collect();
        let mut restored = ten_wide();
        restored.restore(&tables).unwrap();
        assert_eq!(restored.watermark(), Some((3, 16)));
        // The same `now()` again lets nothing in twice.
        assert!(restored
            .advance(&Watermarks::from([(3, 16)]))
            .unwrap()
            .is_empty());
        for f in [&mut filter, &mut restored] {
            let mut later = out.clone();
            later.extend(f.advance(&Watermarks::from([(3, 45)])).unwrap());
            // 12 left at 22; 40 came at 40.
            assert_eq!(net(&later), rows(&[("40", 1)]));
        }
    }
}
