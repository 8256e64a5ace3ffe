//! Session windows: a partition's rows, in time order, fall into one
//! session until two consecutive times are `gap` or more apart. A session
//! runs from its first time to its last time plus `gap` (so a row at or
//! after that end starts a new session, as Flink's session windows do).
//!
//! `SESSION(rel, col, gap [, key ...])` (see `weir-sql`'s `windows.rs`)
//! adds each row's session as `window_start` and `window_end` through two
//! window functions, [`session_start`] and [`session_end`], over the
//! rows of the row's partition (its keys): batch queries evaluate them
//! with DataFusion's `WindowAggExec`, and views with the `OVER` operator
//! (`window_function.rs`), which recomputes each touched partition.
//!
//! Under a watermark, a session whose end the watermark reached is final:
//! a row that is not late (its time at or above the watermark) can only
//! extend or join sessions that end after it. So the `OVER` operator
//! forgets the rows of final sessions ([`SessionExpiry`]), and
//! `window_end` is bounded by the watermark: an aggregate over sessions
//! frees (or, emitting on window close, emits) each session the watermark
//! passes.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::kernels::partition::partition;
use datafusion::arrow::compute::{
    cast, lexsort_to_indices, sort_to_indices, take, SortColumn, SortOptions,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, IntervalMonthDayNano, IntervalUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{exec_err, plan_err, ScalarValue};
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    PartitionEvaluator, Signature, Volatility, WindowUDF, WindowUDFImpl,
};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::PhysicalExprRef;

use weir_state::KeyId;

use crate::keyed_rows::KeyedRows;
use crate::plan::SessionSpec;
use crate::watermark::{
    at_or_above, event_times, interval_nanos, nanos_per_unit, ColumnBound, Watermarks,
};
use crate::Result;

/// The name of the window function giving a row's session start.
pub const SESSION_START: &str = "session_start";
/// The name of the window function giving a row's session end.
pub const SESSION_END: &str = "session_end";

/// `gap` in the unit of a time column of `data_type`: a positive interval
/// without months (they have no fixed length).
pub fn gap_in_units(gap: IntervalMonthDayNano, data_type: &DataType) -> Result<i64> {
    let Some(nanos) = interval_nanos(gap) else {
        return plan_err!("a session gap cannot be counted in months");
    };
    if nanos <= 0 {
        return plan_err!("a session gap must be positive");
    }
    let Some(per_unit) = nanos_per_unit(data_type).map(i128::from) else {
        return plan_err!("session windows need a timestamp column, not {data_type}");
    };
    // A gap shorter than one unit still separates distinct times.
    Ok(i64::try_from((nanos + per_unit - 1) / per_unit).unwrap_or(i64::MAX))
}

/// Each row's session `(start, end)`, for `times` sorted by partition and
/// then time (NULL times last in their partition), partitions beginning
/// at the indexes `partition_starts` (ascending, the first 0). A NULL
/// time belongs to no session.
///
/// A loop, not a kernel: each row's session depends on the row before.
fn sessions_of_sorted(
    times: &Int64Array,
    partition_starts: &[usize],
    gap: i64,
) -> (Int64Array, Int64Array) {
    let rows = times.len();
    let (mut starts, mut ends) = (vec![None; rows], vec![None; rows]);
    let mut bounds = partition_starts.to_vec();
    bounds.push(rows);
    for range in bounds.windows(2) {
        let mut session_begin = range[0];
        let mut row = range[0];
        while row < range[1] && times.is_valid(row) {
            let next = row + 1;
            let closes = next >= range[1]
                || times.is_null(next)
                || times.value(next).saturating_sub(times.value(row)) >= gap;
            if closes {
                let start = times.value(session_begin);
                let end = times.value(row).saturating_add(gap);
                for slot in session_begin..next {
                    starts[slot] = Some(start);
                    ends[slot] = Some(end);
                }
                session_begin = next;
            }
            row = next;
        }
    }
    (Int64Array::from(starts), Int64Array::from(ends))
}

/// Each row's session `(start, end)` over `times` of rows grouped by
/// `keys` (rows with equal key values are one partition; no keys: one
/// partition), in the rows' own order, as `i64` times.
fn sessions(keys: &[ArrayRef], times: &Int64Array, gap: i64) -> Result<(ArrayRef, ArrayRef)> {
    let (order, partition_starts) = match time_order_of_runs(keys, times)? {
        Some(found) => found,
        None => time_order(keys, times)?,
    };
    let sorted_times = take(times, &order, None)?;
    let (starts, ends) = sessions_of_sorted(sorted_times.as_primitive(), &partition_starts, gap);
    // Back to the rows' order: row `order[i]` has the `i`th session. A
    // loop: a scatter, which arrow has no kernel for.
    let mut back = vec![0u32; order.len()];
    for (i, &row) in order.values().iter().enumerate() {
        back[row as usize] = i as u32;
    }
    let back = UInt32Array::from(back);
    Ok((take(&starts, &back, None)?, take(&ends, &back, None)?))
}

/// The rows in partition and time order (NULL times last), and where
/// each partition starts in it: one sort of every row by keys and time.
fn time_order(keys: &[ArrayRef], times: &Int64Array) -> Result<(UInt32Array, Vec<usize>)> {
    let mut sort: Vec<SortColumn> = keys
        .iter()
        .map(|k| SortColumn {
            values: k.clone(),
            options: None,
        })
        .collect();
    sort.push(SortColumn {
        values: Arc::new(times.clone()),
        options: Some(TIME_ORDER),
    });
    let order = lexsort_to_indices(&sort, None)?;
    let sorted_keys: Vec<ArrayRef> = keys
        .iter()
        .map(|k| take(k.as_ref(), &order, None))
        .collect::<std::result::Result<_, _>>()?;
    let partition_starts: Vec<usize> = if sorted_keys.is_empty() {
        vec![0]
    } else {
        partition(&sorted_keys)?
            .ranges()
            .into_iter()
            .map(|r| r.start)
            .collect()
    };
    Ok((order, partition_starts))
}

/// Ascending times, NULLs last.
const TIME_ORDER: SortOptions = SortOptions {
    descending: false,
    nulls_first: false,
};

/// [`time_order`] without sorting by key, when the rows already come
/// grouped by partition (as a partition store hands them over): each run
/// of equal keys is a partition, put in time order on its own (as it
/// is, reversed, or sorted). `None` when a key has two runs.
fn time_order_of_runs(
    keys: &[ArrayRef],
    times: &Int64Array,
) -> Result<Option<(UInt32Array, Vec<usize>)>> {
    let rows = times.len();
    let runs: Vec<std::ops::Range<usize>> = if keys.is_empty() {
        std::iter::once(0..rows).collect()
    } else {
        partition(keys)?.ranges()
    };
    if runs.len() > 1 {
        let firsts = UInt32Array::from_iter_values(runs.iter().map(|r| r.start as u32));
        let heads: Vec<ArrayRef> = keys
            .iter()
            .map(|k| take(k.as_ref(), &firsts, None))
            .collect::<std::result::Result<_, _>>()?;
        let converter = RowConverter::new(
            heads
                .iter()
                .map(|h| SortField::new(h.data_type().clone()))
                .collect(),
        )?;
        let encoded = converter.convert_columns(&heads)?;
        let mut seen = HashSet::with_capacity(runs.len());
        if !encoded.iter().all(|key| seen.insert(key)) {
            return Ok(None);
        }
    }
    let mut order: Vec<u32> = Vec::with_capacity(rows);
    let mut starts = Vec::with_capacity(runs.len());
    for run in runs {
        starts.push(order.len());
        let values = &times.values()[run.clone()];
        let no_nulls =
            times.null_count() == 0 || times.slice(run.start, run.len()).null_count() == 0;
        let range = run.start as u32..run.end as u32;
        if no_nulls && values.is_sorted() {
            order.extend(range);
        } else if no_nulls && values.iter().rev().is_sorted() {
            order.extend(range.rev());
        } else {
            let slice = times.slice(run.start, run.len());
            let sorted = sort_to_indices(&slice, Some(TIME_ORDER), None)?;
            order.extend(sorted.values().iter().map(|&i| run.start as u32 + i));
        }
    }
    Ok(Some((UInt32Array::from(order), starts)))
}

/// Each row's session `(start, end)` among the rows of its partition
/// (`partition`'s values), over time column `time` with `gap`.
fn sessions_of_rows(
    rows: &RecordBatch,
    partition: &[PhysicalExprRef],
    time: usize,
    gap: i64,
) -> Result<(ArrayRef, ArrayRef)> {
    let keys: Vec<ArrayRef> = partition
        .iter()
        .map(|e| e.evaluate(rows)?.into_array(rows.num_rows()))
        .collect::<Result<_>>()?;
    sessions(&keys, &event_times(rows.column(time))?, gap)
}

/// `rows` with the session functions of `spec` over their partitions
/// (`partition`) appended, as `output` (the input's columns, then one
/// per function) has them: what an `OVER` node of session functions
/// computes, with one sort for every partition.
pub(crate) fn with_sessions(
    rows: &RecordBatch,
    partition: &[PhysicalExprRef],
    spec: &SessionSpec,
    output: &SchemaRef,
) -> Result<RecordBatch> {
    let (starts, ends) = sessions_of_rows(rows, partition, spec.time, spec.gap)?;
    let mut columns = rows.columns().to_vec();
    for index in rows.num_columns()..output.fields().len() {
        let values = if spec.ends.contains(&index) {
            &ends
        } else {
            &starts
        };
        columns.push(cast(values, output.field(index).data_type())?);
    }
    Ok(RecordBatch::try_new(output.clone(), columns)?)
}

/// [`session_start`] or [`session_end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bound {
    Start,
    End,
}

/// The window function `session_start(time, gap)` or
/// `session_end(time, gap)`: the start or end of each row's session among
/// the rows of its window partition (its frame and order do not matter).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SessionBound {
    bound: Bound,
    signature: Signature,
}

impl WindowUDFImpl for SessionBound {
    fn name(&self) -> &str {
        match self.bound {
            Bound::Start => SESSION_START,
            Bound::End => SESSION_END,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn partition_evaluator(
        &self,
        _args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        Ok(Box::new(SessionEvaluator { bound: self.bound }))
    }

    fn field(&self, field_args: WindowUDFFieldArgs) -> Result<FieldRef> {
        let types = field_args.input_fields();
        match types {
            [time, gap]
                if matches!(time.data_type(), DataType::Timestamp(..))
                    && matches!(
                        gap.data_type(),
                        DataType::Interval(IntervalUnit::MonthDayNano)
                    ) =>
            {
                Ok(Arc::new(Field::new(
                    field_args.name(),
                    time.data_type().clone(),
                    true,
                )))
            }
            _ => plan_err!(
                "no function matches {}({}): it takes a timestamp and an interval",
                self.name(),
                types
                    .iter()
                    .map(|f| f.data_type().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// Evaluates a [`SessionBound`] over a whole partition at once.
#[derive(Debug)]
struct SessionEvaluator {
    bound: Bound,
}

impl PartitionEvaluator for SessionEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> Result<ArrayRef> {
        let [time, gap] = values else {
            return exec_err!("a session function takes two arguments");
        };
        if num_rows == 0 {
            return Ok(datafusion::arrow::array::new_empty_array(time.data_type()));
        }
        let gap = match ScalarValue::try_from_array(gap, 0)? {
            ScalarValue::IntervalMonthDayNano(Some(gap)) => gap_in_units(gap, time.data_type())?,
            other => return exec_err!("a session gap must be a constant interval, not {other}"),
        };
        // Rows sorted by time (the functions' ORDER BY) are not sorted
        // again: the partition is one run.
        let (starts, ends) = sessions(&[], &event_times(time)?, gap)?;
        let picked = match self.bound {
            Bound::Start => starts,
            Bound::End => ends,
        };
        Ok(cast(&picked, time.data_type())?)
    }
}

/// The window function `session_start(time, gap)`.
pub fn session_start() -> WindowUDF {
    session_function(Bound::Start)
}

/// The window function `session_end(time, gap)`.
pub fn session_end() -> WindowUDF {
    session_function(Bound::End)
}

fn session_function(bound: Bound) -> WindowUDF {
    WindowUDF::new_from_impl(SessionBound {
        bound,
        signature: Signature::any(2, Volatility::Immutable),
    })
}

/// How an `OVER` node of session functions (and nothing else) forgets
/// final sessions: over its input's time column, with the gap in that
/// column's unit, under the watermark's bound on the column.
///
/// At each cut it sorts the rows of the partitions the epoch touched into
/// sessions, forgets those of final sessions, and notes when each such
/// partition's last session ends; a partition the epoch did not touch is
/// forgotten whole once the bound passes that end (its earlier sessions,
/// final since, wait for it). So a cut sorts only the touched partitions.
#[derive(Debug, Clone)]
pub struct SessionExpiry {
    /// The input column the sessions are over.
    time: usize,
    /// The gap, in the time column's unit.
    gap: i64,
    /// The watermark's bound on the time column.
    bound: ColumnBound,
    /// Per partition (key id): when its last session ends, as of the
    /// last cut that touched it; `i64::MAX` for none known.
    ends_by_key: Vec<i64>,
    /// Whether every partition has been sorted once (not yet after a
    /// restore, whose partitions the cuts before did not note).
    noted_all: bool,
}

impl SessionExpiry {
    /// Sessions over input column `time` with `gap`, whose column has
    /// `bound`.
    pub fn new(time: usize, gap: i64, bound: ColumnBound) -> Self {
        SessionExpiry {
            time,
            gap,
            bound,
            ends_by_key: Vec::new(),
            noted_all: false,
        }
    }

    /// Removes from `rows` (kept by partition) the rows of sessions that
    /// end at or before the watermark's bound: no row that is not late
    /// can change them, and the output already holds them. `touched`:
    /// the partitions the epoch changed.
    pub(crate) fn forget_final(
        &mut self,
        rows: &mut KeyedRows,
        watermarks: &Watermarks,
        touched: &[KeyId],
    ) -> Result<()> {
        let Some(bound) = self.bound.value(watermarks)? else {
            return Ok(());
        };
        let sorted: Vec<KeyId> = if std::mem::replace(&mut self.noted_all, true) {
            touched.to_vec()
        } else {
            rows.keys()
        };
        let slots = sorted.iter().map(|&k| k as usize + 1).max().unwrap_or(0);
        if self.ends_by_key.len() < slots {
            self.ends_by_key.resize(slots, i64::MAX);
        }
        let key_exprs = rows.key_exprs().to_vec();
        let (time, gap) = (self.time, self.gap);
        let ends_by_key = &mut self.ends_by_key;
        let mut reads: Vec<usize> = key_exprs
            .iter()
            .flat_map(|e| collect_columns(e).into_iter().map(|c| c.index()))
            .collect();
        reads.push(time);
        reads.sort_unstable();
        reads.dedup();
        rows.remove_where(&sorted, &reads, |batch, owners| {
            let (_, ends) = sessions_of_rows(batch, &key_exprs, time, gap)?;
            // Kept: rows in sessions that end after the bound (or in none).
            let kept = at_or_above(&ends, bound.saturating_add(1))?;
            for &key in owners {
                ends_by_key[key as usize] = i64::MIN;
            }
            // A loop: the greatest end per key, over the rows' keys.
            let ends: &Int64Array = ends.as_primitive();
            for (row, &key) in owners.iter().enumerate() {
                let end = if ends.is_null(row) {
                    i64::MAX
                } else {
                    ends.value(row)
                };
                let slot = &mut ends_by_key[key as usize];
                *slot = (*slot).max(end);
            }
            Ok(kept)
        })?;
        // Partitions whose last session has ended: all their rows go.
        let quiet: Vec<KeyId> = self
            .ends_by_key
            .iter()
            .enumerate()
            .filter(|&(_, &end)| end <= bound)
            .map(|(key, _)| key as KeyId)
            .collect();
        if !quiet.is_empty() {
            rows.remove_where(&quiet, &[], |batch, _| {
                Ok(BooleanArray::from(vec![false; batch.num_rows()]))
            })?;
            for key in quiet {
                self.ends_by_key[key as usize] = i64::MAX;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::datatypes::TimeUnit;

    use super::*;

    #[test]
    fn sessions_split_at_the_gap_per_partition_in_the_rows_order() {
        // Partition 1: 0, 4 (one session), 14 (4 + 10: the gap, a new
        // one), NULL (none); partition 2: 3.
        let keys: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![1, 2, 1, 1, 1]))];
        let times = Int64Array::from(vec![Some(14), Some(3), Some(0), None, Some(4)]);
        let (starts, ends) = sessions(&keys, &times, 10).unwrap();
        let starts: &Int64Array = starts.as_primitive();
        let ends: &Int64Array = ends.as_primitive();
        assert_eq!(
            starts.iter().collect::<Vec<_>>(),
            [Some(14), Some(3), Some(0), None, Some(0)]
        );
        assert_eq!(
            ends.iter().collect::<Vec<_>>(),
            [Some(24), Some(13), Some(14), None, Some(14)]
        );
    }

    #[test]
    fn rows_grouped_by_partition_are_put_in_time_order_per_run() {
        // Partition 1 newest first (as a store's chain hands rows over),
        // partition 2 out of order, partition 3 with a NULL.
        let keys: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![1, 1, 1, 2, 2, 2, 3, 3]))];
        let times = Int64Array::from(vec![
            Some(30),
            Some(5),
            Some(0),
            Some(12),
            Some(1),
            Some(25),
            None,
            Some(7),
        ]);
        let (order, starts) = time_order_of_runs(&keys, &times).unwrap().expect("grouped");
        assert_eq!(order.values().to_vec(), [2, 1, 0, 4, 3, 5, 7, 6]);
        assert_eq!(starts, [0, 3, 6]);
        let (_, ends) = sessions(&keys, &times, 10).unwrap();
        let ends: &Int64Array = ends.as_primitive();
        assert_eq!(
            ends.iter().collect::<Vec<_>>(),
            [
                Some(40),
                Some(15),
                Some(15),
                Some(22),
                Some(11),
                Some(35),
                None,
                Some(17)
            ]
        );
        // A key in two runs: not grouped.
        let split: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![1, 2, 1]))];
        let times = Int64Array::from(vec![1, 2, 3]);
        assert!(time_order_of_runs(&split, &times).unwrap().is_none());
    }

    #[test]
    fn gaps_count_in_the_time_unit_and_must_be_positive_without_months() {
        let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
        let gap = IntervalMonthDayNano::new(0, 1, 1_500);
        assert_eq!(gap_in_units(gap, &micros).unwrap(), 86_400_000_002);
        assert!(gap_in_units(IntervalMonthDayNano::new(1, 0, 0), &micros).is_err());
        assert!(gap_in_units(IntervalMonthDayNano::new(0, 0, -5), &micros).is_err());
        assert!(gap_in_units(gap, &DataType::Int64).is_err());
    }
}
