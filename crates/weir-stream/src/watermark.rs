//! Event time: watermarks, the rows they make late, and the bounds they
//! put on columns computed from an event-time column.
//!
//! A source or table declared with `WATERMARK FOR col AS col - delay`
//! gets a [`WatermarkFilter`] node above its source node in every view
//! that reads it. The filter drops (and counts) rows whose `col` is below
//! the watermark, and notes the greatest `col` it has read. The runtime
//! gathers those greatest times from every instance at each cut and
//! combines them (see `runtime::event_clock`): the watermark is the least
//! of the instances' greatest times, minus the delay. Each barrier
//! carries the watermarks the runtime has so far ([`Watermarks`]), and
//! every operator gets them when it cuts that barrier's epoch
//! ([`crate::Operator::advance`]). So all instances of a view move their
//! watermark at the same epoch, to the same value.
//!
//! Rows that are not late have `col >= watermark`, so a column computed
//! from `col` by a non-decreasing expression (`date_bin`, `date_trunc`,
//! `+ INTERVAL`, a cast, `HOP`'s window starts) is at least that
//! expression of the watermark: a [`ColumnBound`]. An aggregate grouped by
//! such a column knows that the groups below the bound are final.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use datafusion::arrow::compute::kernels::cmp::gt_eq;
use datafusion::arrow::compute::{cast, max};
use datafusion::arrow::datatypes::{
    DataType, Field, Int64Type, IntervalMonthDayNano, Schema, SchemaRef, TimeUnit,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal, TryCastExpr};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{PhysicalExpr, PhysicalExprRef, ScalarFunctionExpr};
use weir_state::{DeltaBatches, TableSpec};

use crate::operator::expect_tables;
use crate::plan::{NodeKind, StreamPlan};
use crate::{Changes, Operator, Placement, Result};

/// Each watermark node's watermark, by node index, in the unit of its
/// column's values (microseconds for `timestamp`).
pub type Watermarks = BTreeMap<usize, i64>;

/// The values of an event-time column as `i64` (a timestamp's count of
/// its unit, a date's days, an integer).
pub(crate) fn event_times(column: &ArrayRef) -> Result<Int64Array> {
    Ok(cast(column, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

/// Whether a column of `data_type` can hold event times.
pub fn is_event_time_type(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Timestamp(..)
            | DataType::Date32
            | DataType::Date64
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
    )
}

/// Which of `values` (event times, or values bounded by a watermark) are
/// at or above `bound` as [`event_times`] reads them (a NULL counts as
/// above: it belongs to no window and never closes).
pub(crate) fn at_or_above(values: &ArrayRef, bound: i64) -> Result<BooleanArray> {
    let times = event_times(values)?;
    let keep = gt_eq(&times, &Int64Array::new_scalar(bound))?;
    Ok(match times.nulls() {
        None => keep,
        Some(nulls) => {
            let known = keep.values() | &!nulls.inner();
            BooleanArray::new(known, None)
        }
    })
}

/// Rows of `input` whose `values` are below `bound` are dropped; returns
/// the rest and how many rows were dropped: by absolute weight, or by
/// the counts in column `counts` (a partial aggregate's rows, each
/// standing for that many input rows).
pub(crate) fn drop_late(
    input: Changes,
    values: &ArrayRef,
    bound: i64,
    counts: Option<usize>,
) -> Result<(Changes, u64)> {
    let keep = at_or_above(values, bound)?;
    if keep.true_count() == keep.len() {
        return Ok((input, 0));
    }
    let dropped = datafusion::arrow::compute::not(&keep)?;
    let represented = match counts {
        Some(column) => event_times(input.rows.column(column))?,
        None => input.weights.clone(),
    };
    let represented = datafusion::arrow::compute::filter(&represented, &dropped)?;
    let late: u64 = represented
        .as_primitive::<Int64Type>()
        .values()
        .iter()
        .map(|w| w.unsigned_abs())
        .sum();
    Ok((input.filter(&keep)?, late))
}

/// Drops late rows and notes the greatest event time (see the module
/// documentation). Its state is one row per instance: the watermark it
/// applies and the rows it dropped.
#[derive(Debug)]
pub struct WatermarkFilter {
    node: usize,
    column: usize,
    /// The event-time column's values per microsecond.
    per_micro: f64,
    instance: u32,
    /// The watermark in force: rows below it are late.
    applied: Option<i64>,
    /// The greatest event time read since the runtime last took it.
    seen: Option<i64>,
    /// Rows dropped as late since the view was created.
    late: u64,
    /// Whether `applied` or `late` changed since the last checkpoint.
    changed: bool,
    /// Rows of instances that no longer run, adopted by instance 0 and
    /// deleted at the next checkpoint.
    adopted: Vec<u32>,
}

impl WatermarkFilter {
    /// The filter of plan node `node`, on event-time column `column` of
    /// type `data_type`.
    pub fn new(node: usize, column: usize, data_type: &DataType) -> Self {
        // Integer event times count as microseconds.
        let per_micro = nanos_per_unit(data_type).map_or(1.0, |n| 1e3 / n as f64);
        WatermarkFilter {
            node,
            column,
            per_micro,
            instance: 0,
            applied: None,
            seen: None,
            late: 0,
            changed: false,
            adopted: Vec::new(),
        }
    }

    fn state_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("instance", DataType::UInt32, false),
            Field::new("watermark", DataType::Int64, true),
            Field::new("late_rows", DataType::Int64, false),
        ]))
    }
}

impl Operator for WatermarkFilter {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        // As `i64` once: the cast of an `Int64Array` in `drop_late` is free.
        let times = event_times(input.rows.column(self.column))?;
        let greatest = max(&times);
        let (kept, late) = match self.applied {
            Some(bound) => drop_late(input, &(Arc::new(times) as ArrayRef), bound, None)?,
            None => (input, 0),
        };
        if late > 0 {
            self.late += late;
            self.changed = true;
        }
        if let Some(greatest) = greatest {
            self.seen = Some(self.seen.map_or(greatest, |s| s.max(greatest)));
        }
        Ok(vec![kept])
    }

    fn advance(&mut self, watermarks: &Watermarks) -> Result<Vec<Changes>> {
        if let Some(&w) = watermarks.get(&self.node) {
            if self.applied.is_none_or(|a| w > a) {
                self.applied = Some(w);
                self.changed = true;
            }
        }
        Ok(Vec::new())
    }

    fn watermark(&self) -> Option<(usize, i64)> {
        self.applied.map(|w| (self.node, w))
    }

    fn take_event_time(&mut self) -> Option<(usize, i64)> {
        self.seen.take().map(|t| (self.node, t))
    }

    fn watermark_micros(&self) -> Option<i64> {
        self.applied.map(|w| (w as f64 / self.per_micro) as i64)
    }

    fn late_rows(&self) -> u64 {
        self.late
    }

    fn state_specs(&self) -> Vec<TableSpec> {
        vec![TableSpec::with_primary_key(Self::state_schema(), vec![0])]
    }

    fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>> {
        let deletes = (!self.adopted.is_empty())
            .then(|| {
                let schema = Arc::new(Schema::new(vec![Self::state_schema().field(0).clone()]));
                let ids = UInt32Array::from(std::mem::take(&mut self.adopted));
                RecordBatch::try_new(schema, vec![Arc::new(ids)])
            })
            .transpose()?;
        let upserts = std::mem::take(&mut self.changed)
            .then(|| {
                RecordBatch::try_new(
                    Self::state_schema(),
                    vec![
                        Arc::new(UInt32Array::from(vec![self.instance])),
                        Arc::new(Int64Array::from(vec![self.applied])),
                        Arc::new(Int64Array::from(vec![self.late as i64])),
                    ],
                )
            })
            .transpose()?;
        Ok(vec![
            (upserts.is_some() || deletes.is_some()).then_some(DeltaBatches { upserts, deletes })
        ])
    }

    fn restore(&mut self, tables: &[RecordBatch]) -> Result<()> {
        self.restore_share(tables, 0, &Placement::new(1))
    }

    /// Every instance applies the greatest watermark stored (they all
    /// applied the same ones); each keeps its own late count, and instance
    /// 0 adopts those of instances that no longer run.
    fn restore_share(
        &mut self,
        tables: &[RecordBatch],
        instance: usize,
        placement: &Placement,
    ) -> Result<()> {
        expect_tables(tables, 1)?;
        let rows = &tables[0];
        let internal = || DataFusionError::Internal("watermark state has other columns".into());
        let instances = rows
            .column(0)
            .as_primitive_opt::<datafusion::arrow::datatypes::UInt32Type>()
            .ok_or_else(internal)?;
        let watermarks = rows
            .column(1)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(internal)?;
        let late = rows
            .column(2)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(internal)?;
        self.instance = instance as u32;
        self.applied = max(watermarks);
        for row in 0..rows.num_rows() {
            let owner = instances.value(row);
            if owner as usize == instance {
                self.late += late.value(row) as u64;
            } else if instance == 0 && owner as usize >= placement.workers() {
                self.late += late.value(row) as u64;
                self.adopted.push(owner);
                self.changed = true;
            }
        }
        Ok(())
    }

    fn memory_size(&self) -> usize {
        0
    }

    fn state_rows(&self) -> Vec<usize> {
        vec![1]
    }
}

/// A lower bound on a column's values in rows that are not late: an
/// expression of a watermark node's watermark.
#[derive(Debug, Clone)]
pub struct ColumnBound {
    /// The watermark node.
    pub node: usize,
    /// The type of the watermark's column.
    pub data_type: DataType,
    /// The bound, over a batch whose one column is the watermark.
    pub expr: PhysicalExprRef,
    /// Whether the column holds the elements of the lists `expr` makes
    /// (`HOP`'s unnested window starts, ascending): the bound is the
    /// first element.
    pub first_element: bool,
}

impl ColumnBound {
    fn watermark_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new(
            "watermark",
            self.data_type.clone(),
            true,
        )]))
    }

    /// The bound under `watermarks`, as the column's values are compared
    /// (`i64`, see [`event_times`]); `None` before the node has a
    /// watermark.
    pub fn value(&self, watermarks: &Watermarks) -> Result<Option<i64>> {
        let Some(&watermark) = watermarks.get(&self.node) else {
            return Ok(None);
        };
        let as_column = cast(
            &(Arc::new(Int64Array::from(vec![watermark])) as ArrayRef),
            &self.data_type,
        )?;
        let batch = RecordBatch::try_new(self.watermark_schema(), vec![as_column])?;
        let mut value = self.expr.evaluate(&batch)?.into_array(1)?;
        if self.first_element {
            let list = value.as_list_opt::<i32>().ok_or_else(|| {
                DataFusionError::Internal("an unnested bound is not a list".into())
            })?;
            if list.is_null(0) || list.value(0).is_empty() {
                return Ok(None);
            }
            value = list.value(0).slice(0, 1);
        }
        let times = event_times(&value)?;
        Ok(times.is_valid(0).then(|| times.value(0)))
    }

    /// The bound of a column computed by `expr` from input columns
    /// bounded by `inputs`: `expr` must read one bounded column and not
    /// decrease as it grows.
    pub(crate) fn through(
        expr: &PhysicalExprRef,
        inputs: &[Option<ColumnBound>],
    ) -> Option<ColumnBound> {
        let columns = collect_columns(expr);
        let [column] = columns.iter().collect::<Vec<_>>()[..] else {
            return None;
        };
        let bound = inputs.get(column.index())?.as_ref()?;
        if bound.first_element {
            let plain = expr.downcast_ref::<Column>().is_some();
            return plain.then(|| bound.clone());
        }
        if !non_decreasing(expr.as_ref()) {
            return None;
        }
        let substituted = expr
            .clone()
            .transform_up(|e| {
                Ok(match e.downcast_ref::<Column>() {
                    Some(_) => Transformed::yes(bound.expr.clone()),
                    None => Transformed::no(e),
                })
            })
            .ok()?
            .data;
        Some(ColumnBound {
            expr: substituted,
            ..bound.clone()
        })
    }
}

/// Whether `expr` never decreases as its columns grow (columns,
/// constants, sums, differences with a constant, order-keeping casts,
/// `date_bin`, `date_trunc` and `hop_window_starts` of a growing time).
fn non_decreasing(expr: &dyn PhysicalExpr) -> bool {
    let constant = |e: &PhysicalExprRef| collect_columns(e).is_empty();
    if expr.downcast_ref::<Column>().is_some() || expr.downcast_ref::<Literal>().is_some() {
        return true;
    }
    if let Some(c) = expr.downcast_ref::<CastExpr>() {
        return keeps_order(c.cast_type()) && non_decreasing(c.expr().as_ref());
    }
    if let Some(c) = expr.downcast_ref::<TryCastExpr>() {
        return keeps_order(c.cast_type()) && non_decreasing(c.expr().as_ref());
    }
    if let Some(b) = expr.downcast_ref::<BinaryExpr>() {
        return match b.op() {
            BinaryOp::Plus => {
                non_decreasing(b.left().as_ref()) && non_decreasing(b.right().as_ref())
            }
            BinaryOp::Minus => non_decreasing(b.left().as_ref()) && constant(b.right()),
            _ => false,
        };
    }
    if let Some(f) = expr.downcast_ref::<ScalarFunctionExpr>() {
        let args = f.args();
        return match (f.name(), args) {
            ("date_bin", [stride, time, rest @ ..]) => {
                constant(stride) && non_decreasing(time.as_ref()) && rest.iter().all(constant)
            }
            ("date_trunc", [unit, time]) => constant(unit) && non_decreasing(time.as_ref()),
            ("hop_window_starts", [time, rest @ ..]) => {
                non_decreasing(time.as_ref()) && rest.iter().all(constant)
            }
            _ => false,
        };
    }
    false
}

/// Nanoseconds in one unit of a timestamp column of `data_type`; `None`
/// for other types.
pub fn nanos_per_unit(data_type: &DataType) -> Option<i64> {
    match data_type {
        DataType::Timestamp(TimeUnit::Second, _) => Some(1_000_000_000),
        DataType::Timestamp(TimeUnit::Millisecond, _) => Some(1_000_000),
        DataType::Timestamp(TimeUnit::Microsecond, _) => Some(1_000),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => Some(1),
        _ => None,
    }
}

/// `interval`'s length in nanoseconds, if it has no months (which have
/// no fixed length).
pub fn interval_nanos(interval: IntervalMonthDayNano) -> Option<i128> {
    (interval.months == 0)
        .then(|| i128::from(interval.days) * 86_400_000_000_000 + i128::from(interval.nanoseconds))
}

/// `interval` as a count of a time column of `data_type`'s unit, if it
/// has no months and is a whole number of them.
pub fn interval_in_units(interval: IntervalMonthDayNano, data_type: &DataType) -> Option<i64> {
    let nanos = interval_nanos(interval)?;
    let per_unit = i128::from(nanos_per_unit(data_type)?);
    (nanos % per_unit == 0)
        .then(|| i64::try_from(nanos / per_unit).ok())
        .flatten()
}

/// Whether a cast to `data_type` keeps the order of times.
fn keeps_order(data_type: &DataType) -> bool {
    is_event_time_type(data_type)
}

impl StreamPlan {
    /// For each node, the bound each output column has (see
    /// [`ColumnBound`]): a watermark node's column, and what is computed
    /// from it by projections, group keys, filters, joins (each side's
    /// columns) and top-N.
    pub fn column_bounds(&self) -> Vec<Vec<Option<ColumnBound>>> {
        let mut all: Vec<Vec<Option<ColumnBound>>> = Vec::with_capacity(self.nodes.len());
        for (index, node) in self.nodes.iter().enumerate() {
            let width = node.schema.fields().len();
            let input = |port: usize| all[node.inputs[port]].clone();
            let mut bounds = match &node.kind {
                NodeKind::Source { .. } | NodeKind::Values { .. } => Vec::new(),
                NodeKind::Watermark { column, .. } => {
                    let mut bounds = input(0);
                    bounds.resize(width, None);
                    let data_type = node.schema.field(*column).data_type().clone();
                    bounds[*column] = Some(ColumnBound {
                        node: index,
                        data_type,
                        expr: Arc::new(Column::new("watermark", 0)),
                        first_element: false,
                    });
                    bounds
                }
                // The time is the node's watermark (`crate::proctime`).
                NodeKind::ProcTime => {
                    let mut bounds = input(0);
                    bounds.resize(width - 1, None);
                    bounds.push(Some(ColumnBound {
                        node: index,
                        data_type: node.schema.field(width - 1).data_type().clone(),
                        expr: Arc::new(Column::new("watermark", 0)),
                        first_element: false,
                    }));
                    bounds
                }
                NodeKind::Window(window) => {
                    // A session that changes ends after the watermark
                    // (see `crate::session`): its end has the time's bound.
                    let mut bounds = input(0);
                    bounds.resize(width, None);
                    if let Some(session) = &window.session {
                        let time = bounds[session.time].clone();
                        for &end in &session.ends {
                            bounds[end] = time.clone();
                        }
                    }
                    bounds
                }
                NodeKind::Filter { .. }
                | NodeKind::TemporalFilter { .. }
                | NodeKind::TopN(_)
                | NodeKind::GroupTopN(_) => input(0),
                NodeKind::Union if node.inputs.len() == 1 => input(0),
                NodeKind::Union => Vec::new(),
                NodeKind::Unnest { column, .. } => {
                    let mut bounds = input(0);
                    if let Some(slot) = bounds.get_mut(*column) {
                        *slot = slot.take().and_then(|b| {
                            let list = matches!(
                                b.expr.data_type(&b.watermark_schema()),
                                Ok(DataType::List(_))
                            );
                            list.then_some(ColumnBound {
                                first_element: true,
                                ..b
                            })
                        });
                    }
                    bounds
                }
                NodeKind::Project { exprs } => {
                    let inputs = input(0);
                    exprs
                        .iter()
                        .map(|e| ColumnBound::through(e, &inputs))
                        .collect()
                }
                NodeKind::Aggregate(spec) => {
                    let inputs = input(0);
                    spec.group
                        .iter()
                        .map(|(e, _)| ColumnBound::through(e, &inputs))
                        .collect()
                }
                NodeKind::Join(_) => {
                    let (mut left, mut right) = (input(0), input(1));
                    let left_width = self.nodes[node.inputs[0]].schema.fields().len();
                    let right_width = self.nodes[node.inputs[1]].schema.fields().len();
                    left.resize(left_width, None);
                    right.resize(right_width, None);
                    if width == left_width + right_width {
                        left.extend(right);
                        left
                    } else if width == right_width && width != left_width {
                        right
                    } else {
                        left
                    }
                }
            };
            bounds.resize(width, None);
            all.push(bounds);
        }
        all
    }

    /// The watermark a view of this plan passes on to views that read
    /// it: its event-time column and delay, where its output only inserts
    /// and one of its columns is a watermarked column of its input as is
    /// (the first such). A view reading it then puts a watermark node
    /// above it, as above an append-only table with `WATERMARK FOR`.
    pub fn output_watermark(&self) -> Option<(usize, i64)> {
        let last = self.nodes.last()?;
        if !last.append_only {
            return None;
        }
        let bounds = self.column_bounds().pop()?;
        bounds.into_iter().enumerate().find_map(|(column, bound)| {
            let bound = bound?;
            let as_is = !bound.first_element
                && bound
                    .expr
                    .downcast_ref::<Column>()
                    .is_some_and(|c| c.index() == 0);
            match &self.nodes[bound.node].kind {
                NodeKind::Watermark { delay, .. } if as_is => Some((column, *delay)),
                _ => None,
            }
        })
    }

    /// Puts a watermark node above every source node of a relation with
    /// a watermark (`watermark_of`: its event-time column and delay, in
    /// the column's unit), making sure the plan reads that column.
    pub fn add_watermarks(&mut self, watermark_of: impl Fn(&str) -> Option<(usize, i64)>) {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        // Where each old node's output now comes from.
        let mut moved = Vec::with_capacity(self.nodes.len());
        for mut node in std::mem::take(&mut self.nodes) {
            for input in &mut node.inputs {
                *input = moved[*input];
            }
            let watermark = match &mut node.kind {
                NodeKind::Source { relation, read } => {
                    let found = watermark_of(relation);
                    if let (Some((column, _)), Some(read)) = (found, read.as_mut()) {
                        if !read.contains(&column) {
                            read.push(column);
                            read.sort_unstable();
                        }
                    }
                    found
                }
                _ => None,
            };
            let source = nodes.len();
            let schema = node.schema.clone();
            let (append_only, key) = (node.append_only, node.key.clone());
            nodes.push(node);
            match watermark {
                Some((column, delay)) => {
                    nodes.push(crate::NodeSpec {
                        kind: NodeKind::Watermark { column, delay },
                        inputs: vec![source],
                        schema,
                        append_only,
                        key,
                    });
                    moved.push(source + 1);
                }
                None => moved.push(source),
            }
        }
        self.nodes = nodes;
    }

    /// `EMIT ON WINDOW CLOSE`: every aggregate grouped by a bounded
    /// column emits its groups once, when the watermark closes them.
    /// Call after [`StreamPlan::mark_append_only`] (the aggregates' state
    /// depends on it), and again after, since their output then only
    /// inserts. Fails, saying why, when no aggregate can.
    pub fn emit_on_window_close(&mut self) -> std::result::Result<(), String> {
        let mut windowed = 0;
        for index in 0..self.nodes.len() {
            let NodeKind::Aggregate(spec) = &self.nodes[index].kind else {
                continue;
            };
            if crate::dataflow::window_of(self, index).is_none() {
                continue;
            }
            let input = &self.nodes[self.nodes[index].inputs[0]];
            if !crate::aggregate::is_columnar(spec, &input.schema, input.append_only) {
                return Err(format!(
                    "EMIT ON WINDOW CLOSE is not supported for \"{}\": an aggregate without columnar \
                     state (string_agg, array_agg, ...) recomputes its groups from their rows",
                    self.describe(index)
                ));
            }
            if let NodeKind::Aggregate(spec) = &mut self.nodes[index].kind {
                spec.emit_on_window_close = true;
                windowed += 1;
            }
        }
        if windowed == 0 {
            return Err(
                "EMIT ON WINDOW CLOSE needs a GROUP BY on a window of a column with a \
                 watermark (TUMBLE, HOP or date_bin over a source's or append-only table's \
                 WATERMARK column)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether node `index` cuts its state at barriers in the instance
    /// that reads its input, without an exchange (a watermark node).
    pub fn cuts_in_place(&self, index: usize) -> bool {
        matches!(self.nodes[index].kind, NodeKind::Watermark { .. })
    }

    /// The watermark nodes: (node, delay, the relation it watches).
    pub fn watermark_nodes(&self) -> Vec<(usize, i64, String)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, node)| match &node.kind {
                NodeKind::Watermark { delay, .. } => match &self.nodes[node.inputs[0]].kind {
                    NodeKind::Source { relation, .. } => Some((i, *delay, relation.clone())),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::TimestampMicrosecondArray;
    use datafusion::arrow::datatypes::TimeUnit;

    fn ts_rows(times: &[Option<i64>]) -> Changes {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        )]));
        let column = TimestampMicrosecondArray::from(times.to_vec());
        Changes::inserts(RecordBatch::try_new(schema, vec![Arc::new(column)]).unwrap())
    }

    #[test]
    fn the_filter_drops_rows_below_the_applied_watermark_and_counts_them() {
        let mut filter =
            WatermarkFilter::new(1, 0, &DataType::Timestamp(TimeUnit::Microsecond, None));
        let out = filter.process(0, ts_rows(&[Some(5), Some(9)])).unwrap();
        assert_eq!(out[0].len(), 2);
        assert_eq!(filter.take_event_time(), Some((1, 9)));
        assert_eq!(filter.take_event_time(), None);
        filter.advance(&Watermarks::from([(1, 7)])).unwrap();
        // An older watermark does not move it back.
        filter.advance(&Watermarks::from([(1, 3)])).unwrap();
        let out = filter
            .process(0, ts_rows(&[Some(6), Some(7), None, Some(8)]))
            .unwrap();
        assert_eq!(out[0].len(), 3);
        assert_eq!(filter.late_rows(), 1);
        assert_eq!(filter.watermark(), Some((1, 7)));

        // Restored, a filter applies the watermark and keeps the count.
        let delta = filter.checkpoint().unwrap().pop().unwrap().unwrap();
        let mut restored =
            WatermarkFilter::new(1, 0, &DataType::Timestamp(TimeUnit::Microsecond, None));
        restored.restore(&[delta.upserts.unwrap()]).unwrap();
        assert_eq!(restored.watermark(), Some((1, 7)));
        assert_eq!(restored.late_rows(), 1);
        assert!(restored.checkpoint().unwrap()[0].is_none());
    }
}
