//! The rows of a join that no row to come on the other side can match,
//! as a watermark moves (see [`crate::watermark`]):
//!
//! - a *window join*, whose keys pair two columns a watermark bounds
//!   (`a.window_start = b.window_start`): once the right side's bound
//!   passes a window, no right row of it can come, so the left rows of
//!   that window are no longer needed, and the other way round;
//! - an *interval join*, whose condition bounds a left time by a right
//!   one (`b.ts BETWEEN a.ts - INTERVAL '10' SECOND AND a.ts`, or any
//!   `l >= r + c` and `l <= r + c'`): a left row
//!   with `l >= r + c` needs right rows with `r <= l - c`, none of which
//!   can come once the right bound passes `l - c`; a right row with
//!   `l <= r + c'` needs left rows with `l <= r + c'`, none of which can
//!   come once the left bound passes `r + c'`.
//!
//! The join drops such rows from its state at the cut ([`JoinWindows`]);
//! the output rows they made stay. A side whose input deletes keeps a row
//! until its own bound passes it too, so that a deletion that can still
//! come finds the row it deletes.
//!
//! An inner join forgets either side's rows independently. The output of
//! an outer, semi, anti or mark join for a row of its *preserved* side
//! (the left of a `LEFT JOIN`, both of a `FULL JOIN`) depends on whether
//! the row has a match, and the join recomputes a touched key from the
//! rows both sides hold: a matched row whose partner left could read as
//! unmatched when a new partner arrives, and its padding (or its semi
//! row) would be retracted or emitted once too often. So a row matched
//! with a preserved row stays until that preserved row can get no new
//! match: with both sides' conditions over one pair of columns (always
//! so for a window join), a row of value `x` also waits until its own
//! bound passes `x + c - c'` (for a window join, its window), by when
//! every preserved row it could have matched is past its other side's
//! bound. Without that pair, such a side keeps its rows.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::filter;
use datafusion::arrow::datatypes::{DataType, Int64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{PhysicalExpr, PhysicalExprRef};
use weir_state::KeyId;

use crate::keyed_rows::KeyedRows;
use crate::plan::JoinSpec;
use crate::watermark::{at_or_above, event_times, interval_in_units, ColumnBound, Watermarks};
use crate::Result;

/// When one side's rows expire: when their `value` is below the other
/// side's bound plus `offset`, and below their own bound if `own` is
/// set.
#[derive(Debug, Clone)]
pub struct SideExpiry {
    /// The expression over the side's rows whose value expires them.
    pub value: PhysicalExprRef,
    /// The bound of the other side's column.
    pub other: ColumnBound,
    /// Added to the other side's bound.
    pub offset: i64,
    /// The bound of `value` on this side, if it has one, which a side
    /// whose input deletes, or whose rows match preserved rows, waits for
    /// too (such a side without one keeps its rows).
    pub own: Option<ColumnBound>,
    /// Added to the own bound (see the module documentation).
    pub own_offset: i64,
}

/// When a join's rows expire.
#[derive(Debug, Clone)]
pub struct JoinExpiry {
    /// The expiry of each side (left, right), where it has one.
    pub sides: [Option<SideExpiry>; 2],
    /// Whether both sides' conditions read the same pair of columns (a
    /// window join's key; an interval join's `l >= r + c` and `l <= r +
    /// c'`), so that a side can wait until the rows it matched can match
    /// nothing new.
    pub paired: bool,
}

/// The window join of key `key`, whose left and right expressions are
/// `left` and `right`, bounded by `bounds` (left, right).
pub(crate) fn window_join(
    left: PhysicalExprRef,
    right: PhysicalExprRef,
    bounds: [ColumnBound; 2],
) -> JoinExpiry {
    let [left_bound, right_bound] = bounds;
    let sides = [
        Some(SideExpiry {
            value: left,
            other: right_bound.clone(),
            offset: 0,
            own: Some(left_bound.clone()),
            own_offset: 0,
        }),
        Some(SideExpiry {
            value: right,
            other: left_bound,
            offset: 0,
            own: Some(right_bound),
            own_offset: 0,
        }),
    ];
    JoinExpiry {
        sides,
        paired: true,
    }
}

/// A column plus a constant, in the column's unit.
#[derive(Debug, Clone, Copy)]
struct Shifted {
    column: usize,
    offset: i64,
}

/// `expr` as a column of `schema` plus or minus a constant (an interval
/// without months on a time column, an integer on an integer column).
fn shifted(expr: &dyn PhysicalExpr, schema: &Schema) -> Option<Shifted> {
    if let Some(column) = expr.downcast_ref::<Column>() {
        return Some(Shifted {
            column: column.index(),
            offset: 0,
        });
    }
    let binary = expr.downcast_ref::<BinaryExpr>()?;
    let sign = match binary.op() {
        BinaryOp::Plus => 1,
        BinaryOp::Minus => -1,
        _ => return None,
    };
    let column = binary.left().downcast_ref::<Column>()?;
    let literal = binary.right().downcast_ref::<Literal>()?;
    let data_type = schema.field(column.index()).data_type();
    let amount = constant_in_units(literal.value(), data_type)?;
    Some(Shifted {
        column: column.index(),
        offset: amount.checked_mul(sign)?,
    })
}

/// A constant as an amount of a column of `data_type`'s unit.
fn constant_in_units(value: &ScalarValue, data_type: &DataType) -> Option<i64> {
    match (value, data_type) {
        (ScalarValue::IntervalMonthDayNano(Some(interval)), DataType::Timestamp(..)) => {
            interval_in_units(*interval, data_type)
        }
        (ScalarValue::Int64(Some(v)), DataType::Int64) => Some(*v),
        (ScalarValue::Int32(Some(v)), DataType::Int32 | DataType::Int64) => Some(i64::from(*v)),
        _ => None,
    }
}

/// The schema a join's condition reads: the left columns, then the
/// right.
pub(crate) fn joined_schema(left: &Schema, right: &Schema) -> Schema {
    Schema::new(
        left.fields()
            .iter()
            .chain(right.fields())
            .cloned()
            .collect::<Vec<_>>(),
    )
}

/// The conjuncts of `expr` (its `AND`s taken apart).
fn conjuncts(expr: &PhysicalExprRef, out: &mut Vec<PhysicalExprRef>) {
    match expr.downcast_ref::<BinaryExpr>() {
        Some(and) if *and.op() == BinaryOp::And => {
            conjuncts(and.left(), out);
            conjuncts(and.right(), out);
        }
        _ => out.push(expr.clone()),
    }
}

/// The interval join in `spec`'s condition, if it bounds a left column
/// by a right one, the other side's column bounded (`left_bounds`,
/// `right_bounds`; see the module documentation). `joined` is the condition's schema: the left
/// columns, then the right.
pub(crate) fn interval_join(
    spec: &JoinSpec,
    joined: &Schema,
    left_bounds: &[Option<ColumnBound>],
    right_bounds: &[Option<ColumnBound>],
) -> Option<JoinExpiry> {
    let filter = spec.filter.as_ref()?;
    let left_width = left_bounds.len();
    let mut parts = Vec::new();
    conjuncts(filter, &mut parts);
    let bound = |column: usize| {
        if column < left_width {
            left_bounds.get(column)?.clone()
        } else {
            right_bounds.get(column - left_width)?.clone()
        }
    };
    let value = |column: usize| -> PhysicalExprRef {
        let index = if column < left_width {
            column
        } else {
            column - left_width
        };
        Arc::new(Column::new(joined.field(column).name(), index))
    };
    let mut expiry: [Option<SideExpiry>; 2] = [None, None];
    // The (left, right) columns each side's condition reads.
    let mut columns: [Option<(usize, usize)>; 2] = [None, None];
    for part in parts {
        let Some(comparison) = part.downcast_ref::<BinaryExpr>() else {
            continue;
        };
        let (Some(a), Some(b)) = (
            shifted(comparison.left().as_ref(), joined),
            shifted(comparison.right().as_ref(), joined),
        ) else {
            continue;
        };
        // As `l op r + c`, `l` a left column and `r` a right one.
        let (l, r, op) = match (a.column < left_width, b.column < left_width) {
            (true, false) => (a, b, *comparison.op()),
            (false, true) => (b, a, comparison.op().swap()?),
            _ => continue,
        };
        let c = r.offset.checked_sub(l.offset)?;
        match op {
            // Left rows need right rows up to `l - c`: they expire as the
            // right bound moves.
            BinaryOp::GtEq | BinaryOp::Gt if expiry[0].is_none() => {
                if let Some(other) = bound(r.column) {
                    expiry[0] = Some(SideExpiry {
                        value: value(l.column),
                        other,
                        offset: c,
                        own: bound(l.column),
                        own_offset: 0,
                    });
                    columns[0] = Some((l.column, r.column));
                }
            }
            // Right rows need left rows up to `r + c`.
            BinaryOp::LtEq | BinaryOp::Lt if expiry[1].is_none() => {
                if let Some(other) = bound(l.column) {
                    expiry[1] = Some(SideExpiry {
                        value: value(r.column),
                        other,
                        offset: c.checked_neg()?,
                        own: bound(r.column),
                        own_offset: 0,
                    });
                    columns[1] = Some((l.column, r.column));
                }
            }
            _ => {}
        }
    }
    (expiry[0].is_some() || expiry[1].is_some()).then_some(JoinExpiry {
        sides: expiry,
        paired: columns[0].is_some() && columns[0] == columns[1],
    })
}

/// One side's keys by the least value of their rows when listed.
#[derive(Debug, Default)]
struct SideWindows {
    /// Keys by value, since they were listed. A key whose rows all went
    /// and whose id was reused stays listed under its old value too: rows
    /// are checked against the bound when they expire.
    listed: BTreeMap<i64, Vec<KeyId>>,
    /// Per key id: whether it is listed.
    is_listed: Vec<bool>,
}

impl SideWindows {
    /// Lists each unlisted key of `ids` under its row's value in
    /// `times` (a NULL value joins nothing and never expires).
    fn list(&mut self, ids: &[KeyId], times: &Int64Array) {
        for (&id, time) in ids.iter().zip(times.iter()) {
            let slot = id as usize;
            if self.is_listed.len() <= slot {
                self.is_listed.resize(slot + 1, false);
            }
            if let (false, Some(time)) = (self.is_listed[slot], time) {
                self.is_listed[slot] = true;
                self.listed.entry(time).or_default().push(id);
            }
        }
    }
}

/// A join's expiry and each side's keys by value.
#[derive(Debug)]
pub(crate) struct JoinWindows {
    expiry: [Option<SideExpiry>; 2],
    sides: [SideWindows; 2],
    /// The bound each side's rows expired below, if any.
    expired: [Option<i64>; 2],
}

impl JoinWindows {
    /// Sides expire as `expiry` says; `deletes`: whether each side's
    /// input deletes (its rows then also wait for their own bound, and
    /// without one never expire); `preserved`: whether each side's output
    /// depends on its rows' matches (an outer, semi, anti or mark join's;
    /// the rows of the other side then wait until the preserved rows they
    /// matched can match nothing new: see the module documentation).
    /// `None` if no side can expire.
    pub fn new(expiry: JoinExpiry, deletes: [bool; 2], preserved: [bool; 2]) -> Option<Self> {
        let JoinExpiry { mut sides, paired } = expiry;
        // `c - c'`: how far behind its own bound a row whose partners are
        // preserved waits.
        let partners_done = match &sides {
            [Some(left), Some(right)] if paired => left.offset.checked_add(right.offset),
            _ => None,
        };
        for side in 0..2 {
            let Some(rule) = sides[side].as_mut() else {
                continue;
            };
            let mut own_offset = deletes[side].then_some(0);
            if preserved[1 - side] {
                let Some(done) = partners_done else {
                    sides[side] = None;
                    continue;
                };
                own_offset = Some(own_offset.map_or(done, |o: i64| o.min(done)));
            }
            match own_offset {
                None => rule.own = None,
                Some(_) if rule.own.is_none() => sides[side] = None,
                Some(offset) => rule.own_offset = offset,
            }
        }
        sides.iter().any(Option::is_some).then(|| JoinWindows {
            expiry: sides,
            sides: [SideWindows::default(), SideWindows::default()],
            expired: [None, None],
        })
    }

    /// Lists the keys `ids` of `rows` just stored on side `side` (0: left).
    pub fn list(&mut self, side: usize, ids: &[KeyId], rows: &RecordBatch) -> Result<()> {
        let Some(expiry) = &self.expiry[side] else {
            return Ok(());
        };
        let values: ArrayRef = expiry.value.evaluate(rows)?.into_array(rows.num_rows())?;
        self.sides[side].list(ids, &event_times(&values)?);
        Ok(())
    }

    /// The value below which side `side`'s rows expire under
    /// `watermarks`, once every bound it needs is known.
    fn threshold(&self, side: usize, watermarks: &Watermarks) -> Result<Option<i64>> {
        let Some(expiry) = &self.expiry[side] else {
            return Ok(None);
        };
        let Some(other) = expiry.other.value(watermarks)? else {
            return Ok(None);
        };
        let needed = other.saturating_add(expiry.offset);
        match &expiry.own {
            None => Ok(Some(needed)),
            Some(own) => Ok(own
                .value(watermarks)?
                .map(|own| needed.min(own.saturating_add(expiry.own_offset)))),
        }
    }

    /// Drops from `stores` (left, right) the rows no row to come on the
    /// other side can match under `watermarks`.
    pub fn expire(&mut self, watermarks: &Watermarks, stores: [&mut KeyedRows; 2]) -> Result<()> {
        let [left, right] = stores;
        for (side, store) in [(0, left), (1, right)] {
            let Some(bound) = self.threshold(side, watermarks)? else {
                continue;
            };
            if self.expired[side].is_some_and(|e| e >= bound) {
                continue;
            }
            self.expired[side] = Some(bound);
            let windows = &mut self.sides[side];
            let still = windows.listed.split_off(&bound);
            let passed = std::mem::replace(&mut windows.listed, still);
            let ids: Vec<KeyId> = passed.into_values().flatten().collect();
            for &id in &ids {
                windows.is_listed[id as usize] = false;
            }
            // Only rows still below the bound: a key keeps its later rows,
            // and is listed again under them (read in the same pass).
            let Some(expiry) = &self.expiry[side] else {
                continue;
            };
            let value = expiry.value.clone();
            let reads: Vec<usize> = collect_columns(&value).iter().map(|c| c.index()).collect();
            let mut kept_rows: Option<(Vec<KeyId>, Int64Array)> = None;
            store.remove_where(&ids, &reads, |rows, owners| {
                let values = value.evaluate(rows)?.into_array(rows.num_rows())?;
                let keep = at_or_above(&values, bound)?;
                let times = filter(&event_times(&values)?, &keep)?;
                let owners = owners
                    .iter()
                    .zip(keep.values().iter())
                    .filter_map(|(&key, kept)| kept.then_some(key))
                    .collect();
                kept_rows = Some((owners, times.as_primitive::<Int64Type>().clone()));
                Ok(keep)
            })?;
            if let Some((owners, times)) = kept_rows {
                self.sides[side].list(&owners, &times);
            }
        }
        Ok(())
    }
}
